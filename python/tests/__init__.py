"""Tests of the flybus Python package; see _router for the router they run against."""
