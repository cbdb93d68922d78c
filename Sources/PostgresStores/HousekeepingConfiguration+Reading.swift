package import ConfigReading
package import Configuration

extension HousekeepingConfiguration {
    /// The keys read, relative to Herald's reader (scoped to `herald`: `ledger.retention_hours`
    /// is HERALD_LEDGER_RETENTION_HOURS). None of their values is secret.
    package static let configKeys: [ConfigKey] = [
        ["housekeeping", "interval_s"], ["ledger", "retention_hours"], ["token", "purge_days"], ["token", "tombstone_days"],
        ["housekeeping", "partitions"],
    ]

    /// Reads housekeeping's interval and retentions from `config`; a key left unset keeps the
    /// default its property states, and HERALD_TOKEN_PURGE_DAYS unset or 0 keeps unregistered
    /// tokens. Throws naming the key when a value is not usable.
    package init(reading config: ConfigReader) throws(ConfigurationValueError) {
        self.init()
        let hour = Duration.seconds(3600)
        let day = Duration.seconds(86_400)
        interval = try config.duration(forKey: ["housekeeping", "interval_s"], unit: .seconds(1), default: interval, in: 1...86_400)
        ledgerRetention = try config.duration(forKey: ["ledger", "retention_hours"], unit: hour, default: ledgerRetention, in: 1...87_600)
        let purgeAfter = try config.duration(forKey: ["token", "purge_days"], unit: day, default: .zero, in: 0...36_500)
        unregisteredTokenRetention = purgeAfter == .zero ? nil : purgeAfter
        tombstoneRetention = try config.duration(forKey: ["token", "tombstone_days"], unit: day, default: tombstoneRetention, in: 1...36_500)
        maintainsPartitions = try config.flag(forKey: ["housekeeping", "partitions"], default: maintainsPartitions)
    }
}
