"""The job core: records, the store, submitting, queueing, launching, job files."""
