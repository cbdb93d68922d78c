import Crypto
import Foundation
import HeraldService
import KafkaTransport
import PushPipeline
import Testing

@Suite struct ConfigurationKeysTests {
    @Test func aMistypedKeyIsReportedNamingTheKeyItMeant() async throws {
        let report = try await HeraldConfiguration.read(environment: [
            "HERALD_MAX_CONCURENT_SENDS": "10", "HERALD_SOMETHING_ELSE": "1",
            // librdkafka's properties pass through; other variables are not Herald's business.
            "HERALD_KAFKA_FETCH_WAIT_MAX_MS": "10", "PATH": "/bin",
        ]).report
        #expect(
            report.unknownKeys == [
                "HERALD_MAX_CONCURENT_SENDS is not a Herald configuration key (did you mean HERALD_MAX_CONCURRENT_SENDS?)",
                "HERALD_SOMETHING_ELSE is not a Herald configuration key",
            ]
        )
    }

    /// The configuration reference's table (docs/configuration.md) lists exactly the keys Herald reads.
    @Test func theConfigurationReferenceListsEveryKeyAndNoOther() async throws {
        let documented = Set(try Self.configurationRows().flatMap(\.keys))
        #expect(
            documented == HeraldConfiguration.keys,
            "missing: \(HeraldConfiguration.keys.subtracting(documented).sorted()), extra: \(documented.subtracting(HeraldConfiguration.keys).sorted())")
    }

    /// Every key the configuration's reads look up is declared by its component's configuration
    /// type, and every declared key is looked up: the reads run with no key set and with an APNs
    /// credential (the hosts, the CA and the connections are read only with one), and
    /// swift-configuration's access reporter records each key looked up. A key read but not
    /// declared fails here even without a default, and `herald config check` lists (set or
    /// default) only declared keys. With ``theConfigurationReferenceListsEveryKeyAndNoOther()``,
    /// the declarations, the reads and the configuration reference's table agree.
    @Test func everyKeyReadIsDeclaredAndEveryDeclaredKeyIsRead() async throws {
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey-\(UUID().uuidString).p8").path
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let environments: [[String: String]] = [
            [:],
            ["HERALD_APNS_KEY_PATH": keyPath, "HERALD_APNS_KEY_ID": "ABC123DEFG", "HERALD_APNS_TEAM_ID": "DEF123GHIJ"],
        ]
        var keysRead: Set<String> = []
        var keysListed: Set<String> = []
        for environment in environments {
            let (configuration, report) = try await HeraldConfiguration.read(environment: environment)
            keysRead.formUnion(report.keysRead)
            for line in OperatorCommands.describe(configuration, report: report) where line.hasPrefix("set: ") || line.hasPrefix("default: ") {
                keysListed.insert(String(line.drop { $0 != " " }.dropFirst().prefix { $0 != " " }))
            }
        }
        let declared = HeraldConfiguration.keys
        #expect(keysRead.subtracting(declared) == HeraldConfiguration.foreignKeys, "read but not declared: \(keysRead.subtracting(declared).sorted())")
        // HERALD_CONFIG_FILE is the one key read before the reader exists: it says what the reader reads.
        #expect(declared.subtracting(keysRead) == ["HERALD_CONFIG_FILE"], "declared but not read: \(declared.subtracting(keysRead).sorted())")
        #expect(keysListed.subtracting(declared).isEmpty, "listed by config check but not declared: \(keysListed.subtracting(declared).sorted())")
        #expect(keysListed.count >= 30, "config check listed \(keysListed.sorted())")
    }

    /// The configuration reference's default for a key is the one Herald applies when the key is
    /// unset, for every key read with a default (with and without an APNs credential).
    @Test func theConfigurationReferenceDefaultsAreTheOnesHeraldApplies() async throws {
        let rows = try Self.configurationRows()
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey-\(UUID().uuidString).p8").path
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: keyPath) }
        let withoutCredential = try await HeraldConfiguration.read(environment: [:]).report
        let withCredential = try await HeraldConfiguration.read(environment: [
            "HERALD_APNS_KEY_PATH": keyPath, "HERALD_APNS_KEY_ID": "ABC123DEFG", "HERALD_APNS_TEAM_ID": "DEF123GHIJ",
        ]).report
        let applied = withoutCredential.defaultsApplied.merging(withCredential.defaultsApplied) { first, _ in first }
        #expect(applied.count >= 25, "the defaults checked: \(applied.keys.sorted())")
        for (key, value) in applied.sorted(by: { $0.key < $1.key }) {
            guard let row = rows.first(where: { $0.keys.contains(key) }) else {
                Issue.record("\(key) has no row in docs/configuration.md's table")
                continue
            }
            #expect(row.defaults.contains(value), "\(key): docs/configuration.md says \(row.defaults), Herald applies \(value)")
        }
    }

    /// The rows of the configuration reference's table (docs/configuration.md, its section
    /// "## Configuration"): the keys each names, and its default column with the thousands
    /// separators of its numbers left out.
    static func configurationRows() throws -> [(keys: [String], defaults: String)] {
        let reference = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/configuration.md"),
            encoding: .utf8
        )
        let section = try #require(reference.components(separatedBy: "## Configuration").dropFirst().first?.components(separatedBy: "\n## ").first)
        return section.split(separator: "\n").filter { $0.hasPrefix("| HERALD_") }.map { row in
            let columns = row.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
            var keys: [String] = []
            var prefix = ""
            for name in columns[1].split(whereSeparator: { $0 == "," || $0 == "/" || $0 == " " }) {
                if name.hasPrefix("HERALD_"), name.allSatisfy({ $0.isUppercase || $0.isNumber || $0 == "_" }) {
                    keys.append(String(name))
                    prefix = String(name[..<(name.lastIndex(of: "_") ?? name.endIndex)])
                } else if name.hasPrefix("_") {
                    keys.append(prefix + name)  // "HERALD_TOPIC_REQUESTS / _TOKENS"
                }
            }
            let defaults = Array(columns.count > 3 ? columns[columns.count - 2] : "")
            let withoutSeparators = defaults.indices.filter { index in
                !(defaults[index] == "," && index > 0 && index + 1 < defaults.count && defaults[index - 1].isNumber
                    && defaults[index + 1].isNumber)
            }
            return (keys, String(withoutSeparators.map { defaults[$0] }))
        }
    }
}

/// HERALD_CONFIG_FILE: the environment's keys in YAML or JSON, read through swift-configuration.
@Suite struct ConfigurationFileTests {
    static func write(_ text: String, named name: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("herald-config-\(UUID().uuidString)-\(name)").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test(arguments: [
        (
            "herald.yaml",
            "HERALD_KAFKA_GROUP: from-file\nHERALD_HTTP_PORT: 9191\nHERALD_MIGRATE_ON_START: true\nHERALD_POSTGRES_URL: postgres://herald:hunter2@db.example.net/herald\nHERALD_KAFKA_SASL_PASSWORD: s3cret\nHERALD_MAX_CONCURRENT_SENDS: 64\n"
        ),
        (
            "herald.json",
            #"{"HERALD_KAFKA_GROUP": "from-file", "HERALD_HTTP_PORT": 9191, "HERALD_MIGRATE_ON_START": true, "HERALD_POSTGRES_URL": "postgres://herald:hunter2@db.example.net/herald", "HERALD_KAFKA_SASL_PASSWORD": "s3cret", "HERALD_MAX_CONCURRENT_SENDS": "64"}"#
        ),
    ])
    func theFileSetsTheSameKeysAndTheEnvironmentWins(name: String, text: String) async throws {
        let path = try Self.write(text, named: name)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (configuration, report) = try await HeraldConfiguration.read(environment: [
            "HERALD_CONFIG_FILE": path, "HERALD_MAX_CONCURRENT_SENDS": "32",
        ])
        #expect(configuration.consumerGroup == "from-file")
        #expect(configuration.httpPort == 9191, "a number in the file")
        #expect(configuration.migrateOnStart, "a boolean in the file")
        #expect(configuration.postgresURL.host == "db.example.net")
        #expect(configuration.kafka.properties["sasl.password"] == "s3cret", "librdkafka's properties pass through from the file too")
        #expect(configuration.pipeline.maxConcurrentSends == 32, "the environment wins over the file")

        let printed = OperatorCommands.describe(configuration, report: report).joined(separator: "\n")
        #expect(!printed.contains("hunter2") && !printed.contains("s3cret"), "secrets are never printed")
        #expect(printed.contains("set: HERALD_POSTGRES_URL = [string: <REDACTED>] (HERALD_CONFIG_FILE)"))
        #expect(printed.contains("set: HERALD_KAFKA_SASL_PASSWORD = [string: <REDACTED>] (HERALD_CONFIG_FILE)"))
        #expect(printed.contains("set: HERALD_MAX_CONCURRENT_SENDS = [int: 32] (environment)"), "read as an integer")
        #expect(printed.contains("set: HERALD_KAFKA_GROUP = [string: from-file] (HERALD_CONFIG_FILE)"))
    }

    @Test func aMistypedKeyInTheFileIsReported() async throws {
        let path = try Self.write("HERALD_HTTP_PROT: 9191\n", named: "herald.yml")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let report = try await HeraldConfiguration.read(environment: ["HERALD_CONFIG_FILE": path]).report
        #expect(report.unknownKeys == ["HERALD_HTTP_PROT is not a Herald configuration key (did you mean HERALD_HTTP_PORT?)"])
    }

    @Test(arguments: [
        ("bad.yaml", "HERALD_HTTP_PORT: eighty\n", "HERALD_HTTP_PORT must be an integer in 0...65535"),
        ("bad.json", #"{"HERALD_HTTP_PORT": [1, 2]}"#, "HERALD_HTTP_PORT must be a single value"),
        ("bad.json", #"{"HERALD_HTTP_PORT": "#, "is not valid YAML or JSON"),
        ("bad.yaml", "- HERALD_HTTP_PORT\n", "must be a mapping of keys to values"),
        ("herald.conf", "HERALD_HTTP_PORT: 1\n", "must end in .yaml, .yml or .json"),
    ])
    func aBadFileIsOneLineNamingTheProblem(name: String, text: String, expected: String) async throws {
        let path = try Self.write(text, named: name)
        defer { try? FileManager.default.removeItem(atPath: path) }
        await #expect {
            _ = try await HeraldConfiguration(environment: ["HERALD_CONFIG_FILE": path])
        } throws: { error in
            "\(error)".contains(expected) && !"\(error)".contains("\n")
        }
        await #expect(throws: ConfigurationError.self) {
            _ = try await HeraldConfiguration(environment: ["HERALD_CONFIG_FILE": path + ".missing"])
        }
    }
}
