"""The SDK runtime an app embeds: :class:`~ldptel.client.sdk.reporter.Reporter` and what it is made of.

The on-device queue, privacy-budget ledger, longitudinal memo, spec cache, uploader and HTTP transport.
Standard library, numpy and mmh3 only.
"""
