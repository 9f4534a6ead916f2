"""Several nodes sharing one PostgreSQL job store."""
