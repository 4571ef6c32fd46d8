#!/usr/bin/env bash
# Assemble Kafka Connect (standalone) plus the Debezium Vitess connector from Maven Central jars,
# for the differential conformance test (tests/conformance/worker/test_conformance_debezium.py).
# Usage: fetch-debezium.sh <debezium-version> <kafka-connect-version> <home> <maven-local-repo>
# Result: <home>/libs/*.jar (one flat classpath) and <home>/.complete; idempotent.
# The Connect version is the Kafka version the Debezium release is built against (its
# debezium-build-parent `version.kafka`), so the connector runs on the API it was compiled for.
set -euo pipefail
version=$1
connect=$2
home=$3
m2=$4
log4j=2.24.3
if [[ -f "$home/.complete" ]]; then exit 0; fi
command -v mvn >/dev/null || { echo "Maven (mvn) is required to fetch Debezium jars: apt-get install maven" >&2; exit 1; }
command -v java >/dev/null || { echo "Java 17 is required to run Kafka Connect: apt-get install openjdk-17-jre-headless" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.shardcdc</groupId><artifactId>debezium-dist</artifactId><version>1</version><packaging>pom</packaging>
  <!-- Debezium's own dependency management (grpc-java, protobuf, Kafka ...), so the transitive
       versions are the ones the connector is built and tested with, not Maven's nearest-wins pick. -->
  <dependencyManagement><dependencies>
    <dependency><groupId>io.debezium</groupId><artifactId>debezium-connector-vitess</artifactId><version>${version}</version><type>pom</type><scope>import</scope></dependency>
  </dependencies></dependencyManagement>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>${connect}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>${connect}</version></dependency>
    <dependency><groupId>io.debezium</groupId><artifactId>debezium-connector-vitess</artifactId><version>${version}</version></dependency>
    <!-- The Kafka distribution's logging backend (Connect 4.x logs through log4j2). -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>${log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>${log4j}</version></dependency>
  </dependencies>
</project>
POM
echo "fetching Kafka Connect ${connect} and Debezium Vitess ${version} jars from Maven Central into ${home}"
rm -rf "$home.tmp"
nice -n 10 mvn -B -q -f "$work/pom.xml" -Dmaven.repo.local="$m2" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$home.tmp/libs"
rm -rf "$home"
mv "$home.tmp" "$home"
echo "$version $connect" > "$home/.complete"
echo "debezium ${version} on connect ${connect}: $(ls "$home/libs" | wc -l) jars"
