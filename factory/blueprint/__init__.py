"""The blueprint stage: every image of a recipes tree finished once (factory.blueprint.planner), with its
deployments, for every later stage to read (generate, build, validate, publish, report)."""

from factory.blueprint.model import Blueprint, Blueprints, RecipePlan
from factory.blueprint.planner import plan_project, plan_recipe

__all__ = ["Blueprint", "Blueprints", "RecipePlan", "plan_project", "plan_recipe"]
