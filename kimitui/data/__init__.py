"""Data shipped inside the package (themes, bundled runs): read through ``kimitui.resources``."""
