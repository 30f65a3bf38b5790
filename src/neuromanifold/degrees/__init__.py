"""The degree and the implicit equations of neurovarieties of polynomial networks (docs/degree.md)."""
