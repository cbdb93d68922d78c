import PostgresTokenStore

extension HousekeepingConfiguration {
    /// The keys housekeeping's configuration is read from.
    static let keys = [
        "HERALD_HOUSEKEEPING_INTERVAL_S", "HERALD_LEDGER_RETENTION_HOURS", "HERALD_TOKEN_PURGE_DAYS", "HERALD_TOKEN_TOMBSTONE_DAYS",
        "HERALD_HOUSEKEEPING_PARTITIONS",
    ]

    /// Housekeeping's interval and retentions; HERALD_TOKEN_PURGE_DAYS unset or 0 keeps
    /// unregistered tokens.
    init(reading source: HeraldConfigurationSource) throws {
        self.init()
        interval = .seconds(try source.integer("HERALD_HOUSEKEEPING_INTERVAL_S", default: 3600, in: 1...86_400))
        let ledgerHours = try source.integer("HERALD_LEDGER_RETENTION_HOURS", default: 168, in: 1...87_600)
        ledgerRetention = .seconds(ledgerHours * 3600)
        let purgeDays = try source.integer("HERALD_TOKEN_PURGE_DAYS", default: 0, in: 0...36_500)
        unregisteredTokenRetention = purgeDays == 0 ? nil : .seconds(purgeDays * 86_400)
        let tombstoneDays = try source.integer("HERALD_TOKEN_TOMBSTONE_DAYS", default: 30, in: 1...36_500)
        tombstoneRetention = .seconds(tombstoneDays * 86_400)
        maintainsPartitions = try source.boolean("HERALD_HOUSEKEEPING_PARTITIONS", default: true)
    }
}
