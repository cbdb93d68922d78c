public import Configuration

/// A configuration value a component cannot use, worded as one line naming its environment
/// variable and never quoting a secret.
public struct ConfigurationValueError: Error, Sendable, CustomStringConvertible {
    /// What is wrong, naming the key.
    public var description: String

    /// Creates the error with its message.
    public init(_ description: String) {
        self.description = description
    }
}

extension ConfigKey {
    /// The environment variable of this key as read through Herald's reader, which is scoped to
    /// `herald`: its components joined with `_`, upper-cased, the way swift-configuration's
    /// environment provider looks it up (HERALD_RETRY_MAX_ATTEMPTS for `retry.max_attempts`).
    public var environmentName: String {
        (["herald"] + components).joined(separator: "_").uppercased()
    }
}

extension ConfigReader {
    /// The integer at `key`, `defaultValue` when unset. Throws naming the key when it is set to
    /// anything but an integer in `range`: the reader alone would fall back to the default.
    public func int(forKey key: ConfigKey, default defaultValue: Int, in range: ClosedRange<Int>) throws(ConfigurationValueError) -> Int {
        let problem = ConfigurationValueError("\(key.environmentName) must be an integer in \(range.lowerBound)...\(range.upperBound)")
        guard let value = int(forKey: key) else {
            guard string(forKey: key) == nil else { throw problem }
            return int(forKey: key, default: defaultValue)
        }
        guard range.contains(value) else { throw problem }
        return value
    }

    /// A duration given at `key` as a whole number of `unit`s in `range` (seconds for the `_S`
    /// keys, hours, days), `defaultValue` when unset; throws naming the key as
    /// ``int(forKey:default:in:)`` does.
    public func duration(
        forKey key: ConfigKey,
        unit: Duration,
        default defaultValue: Duration,
        in range: ClosedRange<Int>
    ) throws(ConfigurationValueError) -> Duration {
        try unit * int(forKey: key, default: Int(defaultValue / unit), in: range)
    }

    /// `true`/`yes`/`1` or `false`/`no`/`0` (any case) at `key`, `defaultValue` when unset. Throws
    /// naming the key when it is set to anything else.
    public func flag(forKey key: ConfigKey, default defaultValue: Bool) throws(ConfigurationValueError) -> Bool {
        guard let value = bool(forKey: key) else {
            guard string(forKey: key) == nil else { throw ConfigurationValueError("\(key.environmentName) must be true or false") }
            return bool(forKey: key, default: defaultValue)
        }
        return value
    }
}
