"""Rule cards: a card per top kernel class from the deep-dive capture."""

from nsightflow.analysis.cards import plan_cards, write_cards
from nsightflow.rules.rulejob import rule_job

sm = snakemake  # noqa: F821
with rule_job(sm.log[0], sm.output):
    found = plan_cards(sm.input.csv, sm.input.plan, sm.input.details)
    write_cards(found, sm.output[0])
    with open(sm.log[0], "w") as log:
        log.write(f"{len(found)} cards\n")
