"""Views: the live screen (mrc-lab top) and the charts, all in one plot style."""
