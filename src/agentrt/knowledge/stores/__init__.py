"""Knowledge store backends: in-process (`memory`), SQLite (`sqlite`) and PostgreSQL (`postgres`)."""
