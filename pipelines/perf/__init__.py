"""The perf pipeline: make an existing kernel of the target faster (LinkedIn's liger-kernel-perf skill as code).

source (static reading) -> profile (baseline, compiled-kernel facts, bound) -> optimise (launch sweep, catalogue
variants under the rules) -> finalise (the winner alone on a branch, full unit tests as the gate, the PR body).
"""
