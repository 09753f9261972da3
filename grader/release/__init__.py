"""The student release: notebooks and stored checks, the students' wheel, the sample class."""
