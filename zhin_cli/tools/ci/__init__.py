"""zhin in a pull request (``action.yml`` through ``scripts/zhin_ci.py``): gates, one Markdown comment."""
