"""How the command line's help shows defaults (pure, argparse only)."""

from __future__ import annotations

import argparse


class SetDefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's help with each option's default, where it has one: an option that is off
    or unset unless given (a flag, a path) says nothing, rather than "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)
