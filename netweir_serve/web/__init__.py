"""The HTTP side: the resource tree, its guard, and the answers it gives."""
