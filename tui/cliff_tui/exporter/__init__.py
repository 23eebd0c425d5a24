"""``cliff-tui exporter``: this machine's memory tiers, the three signs, decode speed, attached
servers and a triangulation's capacity plan as Prometheus metrics, for a fleet's Prometheus and
Grafana. One session feeds the store the dashboard reads; the exporter formats it at scrape time
(``collector``), ``plans`` reads ``--from FILE``, ``server`` listens and runs the session.
"""
