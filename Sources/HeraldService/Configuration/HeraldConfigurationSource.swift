import ConfigReading
import Configuration
import Foundation
import Synchronization
import Yams

/// Where Herald's configuration values come from: swift-configuration's reader over the
/// environment and, when HERALD_CONFIG_FILE names one, a YAML or JSON file with the same keys
/// (the environment wins). Both are read the same way, as environment variables: the file's
/// numbers and booleans are their text, so a typed read parses either alike.
///
/// Components read scoped keys through ``herald`` (`fcm.url` is HERALD_FCM_URL): the provider
/// joins a key's components with `_`, upper-cased. Each component marks its secret keys at the
/// read, so the values printed are redacted by the library. What the reads did (the values set,
/// the defaults applied, the keys looked up) is recorded here, not on the configuration.
struct HeraldConfigurationSource {
    /// The source's own key: HERALD_CONFIG_FILE, read from the environment before the reader exists.
    static let configKeys: [ConfigKey] = [["config_file"]]

    /// The reader scoped to `herald`, for components' typed reads of their own scoped keys.
    let herald: ConfigReader
    /// The same reader unscoped, for the few keys other software defines
    /// (GOOGLE_APPLICATION_CREDENTIALS).
    let unscoped: ConfigReader
    /// Every key given, in the environment or the file (HERALD_* and others).
    let givenKeys: Set<String>
    /// What the reads resolved, by key.
    private let reads: ReadsRecorded

    init(environment: [String: String]) async throws {
        let reads = ReadsRecorded()
        var providers = [Self.provider(environment)]
        var givenKeys = Set(environment.keys)
        if let path = environment[Self.configKeys[0].environmentName], !path.isEmpty {
            let values = try Self.fileValues(path: path)
            providers.append(Self.provider(values))
            givenKeys.formUnion(values.keys)
        }
        self.unscoped = ConfigReader(providers: providers, accessReporter: reads)
        self.herald = unscoped.scoped(to: "herald")
        self.givenKeys = givenKeys
        self.reads = reads
    }

    /// The keys read that have a value, each as `KEY = [type: value] (source)`, secrets redacted.
    var effectiveValues: [String] { reads.effectiveValues }

    /// The defaults the typed reads applied to unset keys, as text by key.
    var defaultsApplied: [String: String] { reads.defaultsApplied }

    /// Every key the reads looked up so far, given or not, by environment name.
    var keysRead: Set<String> { reads.keysRead }

    /// HERALD_* keys given that are not among `known` (HERALD_KAFKA_* pass through to
    /// librdkafka), each with the closest known key when one is near.
    func unknownKeys(known: Set<String>) -> [String] {
        givenKeys.sorted().filter { $0.hasPrefix("HERALD_") && !$0.hasPrefix("HERALD_KAFKA_") && !known.contains($0) }.map { key in
            let closest = known.min { Self.editDistance($0, key) < Self.editDistance($1, key) }
            let hint = closest.map { Self.editDistance($0, key) <= 3 ? " (did you mean \($0)?)" : "" } ?? ""
            return "\(key) is not a Herald configuration key\(hint)"
        }
    }

    /// A provider over `values` by environment name; an empty value counts as unset.
    private static func provider(_ values: [String: String]) -> any ConfigProvider {
        EnvironmentVariablesProvider(environmentVariables: values.filter { !$0.value.isEmpty })
    }

    /// The file's values as text by key. Its top level must be a mapping of keys to single
    /// values (strings, numbers, booleans), like the environment.
    private static func fileValues(path: String) throws -> [String: String] {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigurationError("cannot read HERALD_CONFIG_FILE=\(path)")
        }
        // YAML is a superset of JSON: one parse reads either.
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
        var values: [String: String] = [:]
        for (key, value) in mapping.sorted(by: { $0.key < $1.key }) {
            switch value {
            case let text as String: values[key] = text
            case let flag as Bool: values[key] = String(flag)
            case let number as Int: values[key] = String(number)
            case let number as Double: values[key] = String(number)
            default: throw ConfigurationError("HERALD_CONFIG_FILE=\(path): \(key) must be a single value (a string, number or boolean)")
            }
        }
        return values
    }

    /// Levenshtein distance, for naming the key a typo meant.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// Records what each read resolved to (swift-configuration's access events): every key looked
/// up; for a key given a value, that value as the library describes it, which redacts secrets,
/// and whether the environment or the file gave it; for a key no provider gave, the default the
/// typed read applied.
private final class ReadsRecorded: AccessReporter, Sendable {
    private struct Record {
        var effectiveValues: [String: String] = [:]
        var defaultsApplied: [String: String] = [:]
        var keysRead: Set<String> = []
    }

    private let record = Mutex(Record())

    func report(_ event: AccessEvent) {
        let key = event.metadata.key.components.joined(separator: "_").uppercased()
        record.withLock { _ = $0.keysRead.insert(key) }
        guard case .success(let value?) = event.result else { return }
        guard let index = event.providerResults.firstIndex(where: { (try? $0.result.get().value) != nil }) else {
            let text: String
            switch value.content {
            case .string(let string): text = string
            case .int(let number): text = String(number)
            case .bool(let flag): text = String(flag)
            default: text = "\(value)"
            }
            record.withLock { $0.defaultsApplied[key] = text }
            return
        }
        let source = index == 0 ? "environment" : "HERALD_CONFIG_FILE"
        record.withLock { $0.effectiveValues[key] = "\(key) = \(value) (\(source))" }
    }

    var effectiveValues: [String] { record.withLock { $0.effectiveValues.sorted { $0.key < $1.key }.map(\.value) } }
    var defaultsApplied: [String: String] { record.withLock { $0.defaultsApplied } }
    var keysRead: Set<String> { record.withLock { $0.keysRead } }
}
