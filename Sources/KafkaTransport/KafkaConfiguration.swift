/// Connection settings shared by Herald's consumer and producer.
package struct KafkaConfiguration: Sendable, Hashable {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    package var bootstrapServers: String
    /// Any other librdkafka property by its dotted name (`security.protocol`, `sasl.username`…).
    /// Values may be secrets: they are never logged.
    package var properties: [String: String]

    package init(bootstrapServers: String, properties: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.properties = properties
    }
}
