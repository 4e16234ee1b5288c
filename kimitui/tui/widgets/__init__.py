"""The dashboard's building blocks: the keyed table and the tables and panels made of it, the header."""
