import Configuration
import Foundation
import Synchronization
import Yams

/// Where Herald's configuration values come from: swift-configuration's reader over the
/// environment and, when HERALD_CONFIG_FILE names one, a YAML or JSON file with the same keys
/// (the environment wins). Secrets are marked, so the values `herald config check` prints are
/// redacted by the library.
///
/// Components read scoped keys through ``herald`` (`fcm.url` is HERALD_FCM_URL): the environment
/// joins a key's components with `_`, upper-cased, and the file's keys are looked up the same way.
struct HeraldConfigurationSource {
    let reader: ConfigReader
    /// The reader scoped to `herald`, for components' typed reads of their own scoped keys.
    var herald: ConfigReader { reader.scoped(to: "herald") }
    /// Every key given, in the environment or the file (HERALD_* and others).
    let givenKeys: Set<String>
    /// What each key read resolved to, secrets redacted, and where it came from.
    private let valuesRead: ValuesRead
    /// The defaults the typed reads applied to unset keys, by key.
    private let defaults: DefaultsApplied

    /// Keys whose values are secret: the database URL (it may hold a password), the
    /// certificate password, and librdkafka's passwords, secrets and keys.
    static func isSecret(_ key: String) -> Bool {
        if key == "HERALD_POSTGRES_URL" || key == "HERALD_APNS_CERT_PASSWORD" { return true }
        guard key.hasPrefix("HERALD_KAFKA_") else { return false }
        return ["PASSWORD", "SECRET", "_KEY_PEM", "TOKEN"].contains { key.contains($0) }
    }

    init(environment: [String: String]) async throws {
        let defaults = DefaultsApplied()
        let valuesRead = ValuesRead(defaults: defaults)
        var providers: [any ConfigProvider] = [
            EnvironmentVariablesProvider(environmentVariables: environment, secretsSpecifier: .dynamic { key, _ in Self.isSecret(key) })
        ]
        var givenKeys = Set(environment.keys)
        if let path = environment["HERALD_CONFIG_FILE"], !path.isEmpty {
            let (provider, keys) = try Self.fileProvider(path: path)
            providers.append(provider)
            givenKeys.formUnion(keys)
        }
        self.reader = ConfigReader(providers: providers, accessReporter: valuesRead)
        self.givenKeys = givenKeys
        self.valuesRead = valuesRead
        self.defaults = defaults
    }

    /// The value of `key` as text: a string, or a YAML/JSON number or boolean written as one;
    /// nil when unset or empty.
    subscript(key: String) -> String? {
        let configKey = ConfigKey([key])
        let isSecret = Self.isSecret(key)
        let text =
            reader.string(forKey: configKey, isSecret: isSecret)
            ?? reader.int(forKey: configKey, isSecret: isSecret).map(String.init)
            ?? reader.bool(forKey: configKey, isSecret: isSecret).map(String.init)
        guard let text, !text.isEmpty else { return nil }
        return text
    }

    /// The keys read that have a value, each as `KEY = [type: value] (source)`, secrets redacted.
    var effectiveValues: [String] { valuesRead.lines }

    /// The defaults applied to unset keys so far, as text.
    var defaultsApplied: [String: String] { defaults.values.withLock { $0 } }

    /// Records that `key` was unset and read as `value`, and returns `value`.
    func applying<Value>(_ value: Value, to key: String) -> Value {
        defaults.values.withLock { $0[key] = "\(value)" }
        return value
    }

    /// The file's provider and its keys. Its top level must be a mapping of keys to single
    /// values (strings, numbers, booleans), like the environment.
    private static func fileProvider(path: String) throws -> (any ConfigProvider, [String]) {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigurationError("cannot read HERALD_CONFIG_FILE=\(path)")
        }
        // YAML is a superset of JSON: one parse lists the keys of either.
        let parsed: Any?
        do {
            parsed = try Yams.load(yaml: text)
        } catch {
            throw ConfigurationError("HERALD_CONFIG_FILE=\(path) is not valid YAML or JSON")
        }
        guard let mapping = parsed as? [String: Any] else {
            throw ConfigurationError("HERALD_CONFIG_FILE=\(path) must be a mapping of keys to values (KEY: value)")
        }
        guard path.hasSuffix(".json") || path.hasSuffix(".yaml") || path.hasSuffix(".yml") else {
            throw ConfigurationError("HERALD_CONFIG_FILE=\(path) must end in .yaml, .yml or .json")
        }
        // The one parse serves both the key list and the values (an in-memory provider), so the
        // file is read and parsed once.
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        for (key, value) in mapping.sorted(by: { $0.key < $1.key }) {
            let content: ConfigContent
            switch value {
            case let text as String: content = .string(text)
            case let flag as Bool: content = .bool(flag)
            case let number as Int: content = .int(number)
            case let number as Double: content = .double(number)
            default: throw ConfigurationError("HERALD_CONFIG_FILE=\(path): \(key) must be a single value (a string, number or boolean)")
            }
            values[AbsoluteConfigKey([key])] = ConfigValue(content, isSecret: isSecret(key))
        }
        // A scoped key (`herald.fcm.url`) is found under its flat name (HERALD_FCM_URL).
        let provider = InMemoryProvider(name: "HERALD_CONFIG_FILE", values: values).mapKeys { Self.flatKey($0) }
        return (provider, Array(mapping.keys))
    }

    /// The one-component key the environment and the file use for `key`: its components joined
    /// with `_`, upper-cased (HERALD_FCM_URL for `herald.fcm.url`; a flat key stays as it is).
    static func flatKey(_ key: AbsoluteConfigKey) -> AbsoluteConfigKey {
        AbsoluteConfigKey([flatName(key.components)], context: key.context)
    }

    static func flatName(_ components: [String]) -> String {
        components.count == 1 ? components[0] : components.joined(separator: "_").uppercased()
    }
}

/// Records what each key read resolved to (swift-configuration's access events): the value as
/// the library describes it, which redacts secrets, and whether the environment or the file
/// gave it. A value no provider gave is a default a typed read applied: it goes to the defaults.
private final class ValuesRead: AccessReporter, Sendable {
    private let values = Mutex<[String: String]>([:])
    private let defaults: DefaultsApplied

    init(defaults: DefaultsApplied) {
        self.defaults = defaults
    }

    func report(_ event: AccessEvent) {
        guard case .success(let value?) = event.result else { return }
        let key = HeraldConfigurationSource.flatName(event.metadata.key.components)
        guard let index = event.providerResults.firstIndex(where: { (try? $0.result.get().value) != nil }) else {
            let text: String
            switch value.content {
            case .string(let string): text = string
            case .int(let number): text = String(number)
            case .bool(let flag): text = String(flag)
            default: text = "\(value)"
            }
            defaults.values.withLock { $0[key] = text }
            return
        }
        let source = index == 0 ? "environment" : "HERALD_CONFIG_FILE"
        values.withLock { $0[key] = "\(key) = \(value) (\(source))" }
    }

    var lines: [String] { values.withLock { $0.sorted { $0.key < $1.key }.map(\.value) } }
}

/// The defaults applied to unset keys, as text by key (shared by the source's copies).
private final class DefaultsApplied: Sendable {
    let values = Mutex<[String: String]>([:])
}
