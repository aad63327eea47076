"""Custom-call cost rules, one per file; `registry.custom_call` finds the rule for a target."""

from hlogap.cost.custom_calls.registry import CustomCost, custom_call

__all__ = ["CustomCost", "custom_call"]
