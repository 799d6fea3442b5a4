"""Writing what a run shows: the notebooks' kit (`notebook`), the HTML report executed against a
run (`report`), and the README's and RESULTS' generated blocks (`generated`)."""
