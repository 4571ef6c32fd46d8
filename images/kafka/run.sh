#!/bin/sh
# One process as broker and controller (KRaft). KAFKA_ADVERTISED (host:port) is the address clients
# are told, the pod's Service name; KAFKA_DATA (default /var/lib/kafka) holds the config and the log.
set -eu
data=${KAFKA_DATA:-/var/lib/kafka}
advertised=${KAFKA_ADVERTISED:?KAFKA_ADVERTISED (the Service host:port clients use) is required}
mkdir -p "$data/log"
cat > "$data/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093
advertised.listeners=PLAINTEXT://$advertised
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$data/log
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
PROPS
cat > "$data/log4j.properties" <<'LOG4J'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
LOG4J
java_run() {
  exec_or_run=$1; shift
  $exec_or_run java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    "-Dlog4j.configuration=file:$data/log4j.properties" -cp '/opt/kafka/libs/*' "$@"
}
java_run "" kafka.tools.StorageTool format -t "${KAFKA_CLUSTER_ID:-c2hhcmRjZGMtZTJlLWthZg}" -c "$data/server.properties" --ignore-formatted
java_run exec kafka.Kafka "$data/server.properties"
