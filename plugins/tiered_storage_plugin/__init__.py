"""Airflow pieces of the tiering pipeline: the cluster hook, the job operator, partition
deletion requests and the status/report web app.

Imported by package name (``plugins/`` is on ``sys.path``); ``.airflowignore`` keeps the plugin
loader from importing its modules one by one. Nothing here imports Spark, Great Expectations or
the broker at module level: DAG files import it at parse time.
"""
