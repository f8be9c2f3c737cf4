"""Namespaces (tenants): the directory of declared ones and what each one holds."""
