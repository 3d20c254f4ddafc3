"""The job domain: jobs, attempts, kinds, retry policy and their services."""
