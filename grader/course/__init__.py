"""The course model every package reads: cells, folders, typed results, submissions read."""
