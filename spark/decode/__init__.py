"""Stage 2: each raw segment decoded once into the change log and a side output."""
