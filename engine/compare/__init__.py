"""Comparisons: cached vs full recompute (diff), printed tables (expect/check), dumps (against), gradients."""
