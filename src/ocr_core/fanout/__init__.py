"""One command for N HF Jobs: `--jobs N` launches a recipe's shards as jobs, watches them, relaunches the ones that
fail, and says at the end what the run did and cost.

command/jobs_request.py reads the launcher's flags off the recipe's command line; launcher.py is its whole life
from the parsed command to the summary line; plan.py decides the N launches and the labels that name them; jobs.py
is the Jobs client (huggingface_hub, or a test's double); heal.py decides, per shard, from its jobs alone, whether
to launch, wait, relaunch or give up; standing.py settles what the output holds of this run (which shards are in;
results made another way, refused or cleared before any launch); pages.py reads the running shards' pages off the
output repo, each progress file once; watch.py decides the lines shown while watching; summary.py adds up pages,
errors and money; and drive.py runs the loop. Everything but drive.py, standing.py's and pages.py's reads and
jobs.py's real client is pure, so tests decide it without a network.
"""
