"""The course's grader, one folder per step of the pipeline (docs/architecture.md)."""

import sys

# nbformat validates with jsonschema, which imports rfc3987_syntax (when installed) for the `iri`
# format alone; that module builds some 35 Earley parsers at import, 1 to 5 s of every grader
# command's start on a 2-core machine (python-jsonschema/jsonschema#1428, docs/benchmarks.md). No
# schema the grader validates (nbformat's, nbgrader's) uses that format, and without the module
# jsonschema checks no `iri` and nothing else.
sys.modules.setdefault("rfc3987_syntax", None)
