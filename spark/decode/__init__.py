"""Stage 1 of the data plane: each raw segment decoded once into the change log and a side output."""
