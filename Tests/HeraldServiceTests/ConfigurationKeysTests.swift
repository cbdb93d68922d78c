import Foundation
import HeraldService
import Testing

@Suite struct ConfigurationKeysTests {
    @Test func aMistypedKeyIsReportedNamingTheKeyItMeant() throws {
        let configuration = try HeraldConfiguration(environment: [
            "HERALD_MAX_CONCURENT_SENDS": "10", "HERALD_SOMETHING_ELSE": "1",
            // librdkafka's properties pass through; other variables are not Herald's business.
            "HERALD_KAFKA_FETCH_WAIT_MAX_MS": "10", "PATH": "/bin",
        ])
        #expect(
            configuration.unknownKeys == [
                "HERALD_MAX_CONCURENT_SENDS is not a Herald configuration key (did you mean HERALD_MAX_CONCURRENT_SENDS?)",
                "HERALD_SOMETHING_ELSE is not a Herald configuration key",
            ]
        )
    }

    /// The README's configuration table lists exactly the keys Herald reads.
    @Test func theREADMEsTableListsEveryKeyAndNoOther() throws {
        let readme = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../README.md"),
            encoding: .utf8
        )
        let section = try #require(readme.components(separatedBy: "## Configuration").dropFirst().first?.components(separatedBy: "\n## ").first)
        var documented: Set<String> = []
        for row in section.split(separator: "\n") where row.hasPrefix("| HERALD_") {
            let firstColumn = row.split(separator: "|").first.map(String.init) ?? ""
            var prefix = ""
            for name in firstColumn.split(whereSeparator: { $0 == "," || $0 == "/" || $0 == " " }) {
                if name.hasPrefix("HERALD_"), name.allSatisfy({ $0.isUppercase || $0.isNumber || $0 == "_" }) {
                    documented.insert(String(name))
                    prefix = String(name[..<(name.lastIndex(of: "_") ?? name.endIndex)])
                } else if name.hasPrefix("_") {
                    documented.insert(prefix + name)  // "HERALD_TOPIC_REQUESTS / _TOKENS"
                }
            }
        }
        #expect(documented == HeraldConfiguration.keys, "missing: \(HeraldConfiguration.keys.subtracting(documented).sorted()), extra: \(documented.subtracting(HeraldConfiguration.keys).sorted())")
    }
}
