"""Code that reads what the tools exported: the nsys SQLite and stats exports, ncu's raw CSV, attribution of launches
to stages and steps, the capture plan, matching ncu's results to it. It launches nothing and runs nothing inside the
program."""
