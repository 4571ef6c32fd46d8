#!/bin/bash
# Entrypoint of the shardcdc Spark image. Spark on Kubernetes starts its pods with a first argument
# of `driver` or `executor` and passes the rest through arguments and SPARK_* variables (the
# contract of Spark's own kubernetes/dockerfiles/spark/entrypoint.sh, reimplemented minimally).
# Anything else is run as given: `spark-submit ...` (a backfill submission Job), `shardcdc ...`.
set -euo pipefail

case "${1:-}" in
  driver)
    shift
    # The driver pod runs the application in client mode against the cluster it is already in.
    exec spark-submit \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client \
      "$@"
    ;;
  executor)
    shift
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... in order.
    java_opts=()
    while IFS= read -r opt; do java_opts+=("$opt"); done < <(
      env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//' || true)
    exec "${JAVA_HOME}/bin/java" \
      "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY:?}" -Xmx"${SPARK_EXECUTOR_MEMORY:?}" \
      -cp "${SPARK_CONF_DIR}:${SPARK_HOME}/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL:?}" \
      --executor-id "${SPARK_EXECUTOR_ID:?}" \
      --cores "${SPARK_EXECUTOR_CORES:?}" \
      --app-id "${SPARK_APPLICATION_ID:?}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:?}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-$HOSTNAME}" \
      "$@"
    ;;
  "")
    exec spark-submit --help
    ;;
  *)
    exec "$@"
    ;;
esac
