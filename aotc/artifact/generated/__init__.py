"""flatc's code for schema.fbs (imported by aotc.artifact only; never edited by hand)."""
