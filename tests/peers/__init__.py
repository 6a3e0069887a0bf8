"""Peer acceptance suites: other projects' reference results, merge for merge and id for id."""
