"""Lightning callbacks: per-layer statistics (``stats``) and the µP coordinate check (``coord``)."""
