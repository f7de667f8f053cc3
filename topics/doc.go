// Package topics is waitroom's Kafka contract: the names, partition counts and
// configs of every topic, the versioned JSON message carried by each, the DLQ
// headers, and Ensure/Check, which make a cluster match the contract with kadm.
package topics
