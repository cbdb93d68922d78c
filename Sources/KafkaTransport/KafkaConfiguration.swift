/// Connection settings shared by Herald's consumer and producer.
public struct KafkaConfiguration: Sendable, Hashable {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    public var bootstrapServers: String
    /// Any other librdkafka property by its dotted name (`security.protocol`, `sasl.username`…).
    /// Values may be secrets: they are never logged.
    public var properties: [String: String]

    public init(bootstrapServers: String, properties: [String: String] = [:]) {
        self.bootstrapServers = bootstrapServers
        self.properties = properties
    }
}
