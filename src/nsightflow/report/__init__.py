"""Report: the HTML pages (a run's and the cross-run index) from the run files. Depends on nsightflow.analysis."""
