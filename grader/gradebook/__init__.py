"""The gradebook: nbgrader's configuration, the preprocessor, recording, queries, LMS files."""
