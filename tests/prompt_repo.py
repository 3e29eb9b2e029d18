"""What the CI tests (the GitHub Action, the pre-commit hooks) put in a scratch prompt repository: a zhin.yaml
adding a house rule, and a plugin segment that changes on every turn (a prompt whose cached prefix always breaks)."""

RULES = 'segments:\n  add:\n    - {{id: house.rules, kind: system, weight: 50, retention: required, text: "{}"}}\n'
CLOCK = """\
class Clock:
    id, kind, weight, retention = "plugin.clock", "environment", 1, "required"
    def inject(self, input):
        return "turn of " + str(len(input.history))
def register(generation):
    generation.register(Clock())
"""
