import Foundation
import HeraldService
import Testing
import Yams

/// Every YAML and JSON file under deploy/ parses, and every HERALD_* variable the manifests, the
/// kustomize env files and the compose file set is a key Herald knows (or a librdkafka property,
/// HERALD_KAFKA_*).
@Suite struct DeployFilesTests {
    static let deploy = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../deploy")

    /// The files under deploy/ with one of `extensions`, but deploy/keys/ (the compose file's
    /// generated passwords, ignored by git: a clone has none until scripts/compose-keys.sh runs).
    static func files(withExtensions extensions: Set<String>) throws -> [URL] {
        let enumerator = FileManager.default.enumerator(at: deploy, includingPropertiesForKeys: nil)
        return (enumerator?.allObjects as? [URL] ?? [])
            .filter { extensions.contains($0.pathExtension) && !$0.standardizedFileURL.path.contains("/deploy/keys/") }
            .sorted { $0.path < $1.path }
    }

    /// Every string (key or value) in a parsed document.
    static func strings(in node: Any) -> [String] {
        switch node {
        case let text as String: [text]
        case let list as [Any]: list.flatMap(strings)
        case let map as [String: Any]: map.keys.map { $0 } + map.values.flatMap(strings)
        case let map as [AnyHashable: Any]: map.keys.compactMap { $0 as? String } + map.values.flatMap(strings)
        default: []
        }
    }

    /// `HERALD_` and capitals, digits or underscores.
    static func isVariable(_ text: String) -> Bool {
        text.hasPrefix("HERALD_") && text.utf8.allSatisfy { ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) || $0 == 95 }
    }

    /// The variable `text` names: all of it, or the key of a `KEY=value` line (a kustomize env
    /// file's line or `literals:` entry).
    static func variable(in text: String) -> String? {
        let key = String(text.prefix { $0 != "=" })
        return isVariable(key) ? key : nil
    }

    @Test func everyFileParsesAndSetsOnlyKeysHeraldKnows() throws {
        let yamlFiles = try Self.files(withExtensions: ["yaml", "yml"])
        let jsonFiles = try Self.files(withExtensions: ["json"])
        #expect(yamlFiles.count >= 10, "\(yamlFiles.map(\.lastPathComponent))")
        var variables: Set<String> = []
        for file in yamlFiles {
            var count = 0
            for document in try Yams.load_all(yaml: String(contentsOf: file, encoding: .utf8)) {
                count += 1
                let names = Self.strings(in: document).compactMap { Self.variable(in: $0) }
                variables.formUnion(names)
            }
            #expect(count >= 1, "\(file.lastPathComponent) holds a document")
        }
        for file in try Self.files(withExtensions: ["env"]) {
            let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n").filter { !$0.hasPrefix("#") }
            variables.formUnion(lines.compactMap { Self.variable(in: String($0)) })
        }
        for file in jsonFiles {
            _ = try JSONSerialization.jsonObject(with: Data(contentsOf: file))
        }
        // The URL itself is a secret: the manifests name the file that holds it.
        #expect(variables.contains("HERALD_POSTGRES_URL_FILE") && variables.contains("HERALD_APNS_KEY_PATH"), "\(variables.sorted())")
        let unknown = variables.filter { !$0.hasPrefix("HERALD_KAFKA_") && !HeraldConfiguration.keys.contains($0) }
        #expect(unknown.isEmpty, "not Herald's: \(unknown.sorted())")
    }

    /// The kustomize base's files; scripts/check-deploy.sh checks the same on every rendered overlay.
    @Test func theDeploymentOutlastsHeraldsDrainAndTheScalerStopsAtThePartitions() throws {
        let base = Self.deploy.appendingPathComponent("kubernetes/base")
        let deployment = try Yams.load(yaml: String(contentsOf: base.appendingPathComponent("deployment.yaml"), encoding: .utf8)) as? [String: Any]
        let environment = try String(contentsOf: base.appendingPathComponent("herald.env"), encoding: .utf8).split(separator: "\n")
        let pod = ((deployment?["spec"] as? [String: Any])?["template"] as? [String: Any])?["spec"] as? [String: Any]
        let grace = try #require(pod?["terminationGracePeriodSeconds"] as? Int)
        let drain = try #require(environment.first { $0.hasPrefix("HERALD_SHUTDOWN_GRACE_S=") }.flatMap { Int($0.dropFirst("HERALD_SHUTDOWN_GRACE_S=".count)) })
        // The drain cap, then the producer's flush (10 s), the consumers' close (10 s) and a margin (5 s).
        #expect(grace >= drain + 10 + 10 + 5, "the pod outlives Herald's drain, flush and close")
        let scaler = try Yams.load(yaml: String(contentsOf: base.appendingPathComponent("keda.yaml"), encoding: .utf8)) as? [String: Any]
        #expect((scaler?["spec"] as? [String: Any])?["maxReplicaCount"] as? Int == 48)
    }
}
