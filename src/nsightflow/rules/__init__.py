"""Rules: what the Snakemake workflow needs from the library: the config check (config), sweep points and run ids
(sweep), and the job wrapper every rule script runs in (rulejob). The top layer: it may use any other."""
