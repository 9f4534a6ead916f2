"""Crawls that look after themselves (docs/reliability.md): the policies
a job runs under (deadlines, the stall watch, retries, memory and CPU
limits), where they are given and how they combine."""
