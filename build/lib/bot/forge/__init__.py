"""Forges: one interface (`base.Forge`), a real `local` implementation beside `github` (Renovate-style)."""
