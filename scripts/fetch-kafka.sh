#!/usr/bin/env bash
# Assemble a pinned Apache Kafka broker (KRaft) from Maven Central jars.
# Usage: fetch-kafka.sh <version> <kafka-home> <maven-local-repo>
# Result: <kafka-home>/libs/*.jar and <kafka-home>/.complete; idempotent.
set -euo pipefail
version=$1
home=$2
m2=$3
if [[ -f "$home/.complete" ]]; then exit 0; fi
command -v mvn >/dev/null || { echo "Maven (mvn) is required to fetch Kafka jars: apt-get install maven" >&2; exit 1; }
command -v java >/dev/null || { echo "Java 17 is required to run Kafka: apt-get install openjdk-17-jre-headless" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.shardcdc</groupId><artifactId>kafka-dist</artifactId><version>1</version><packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>${version}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
POM
echo "fetching Apache Kafka ${version} jars from Maven Central into ${home}"
rm -rf "$home.tmp"
mvn -B -q -f "$work/pom.xml" -Dmaven.repo.local="$m2" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$home.tmp/libs"
rm -rf "$home"
mv "$home.tmp" "$home"
echo "$version" > "$home/.complete"
echo "kafka ${version}: $(ls "$home/libs" | wc -l) jars"
