"""``tidelake repair``: re-derive published history from the archive and move the tags that changed (``run``)."""
