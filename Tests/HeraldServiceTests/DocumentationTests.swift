import Foundation
import Testing

/// The getting-started articles' Swift code is the embedding examples' code, which the test
/// command compiles and runs: every ```swift block of an article appears, line for line, in
/// the example it names (`Examples/Embedding/Sources/<Example>`).
@Suite struct DocumentationTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test(arguments: ["Sources/APNSHTTP2/APNSHTTP2.docc/GettingStarted.md", "Sources/PushPipeline/PushPipeline.docc/EmbeddingThePipeline.md"])
    func everyCodeBlockIsCompiledExampleCode(article: String) throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent(article), encoding: .utf8)
        let example = try #require(text.firstMatch(of: /Examples\/Embedding\/Sources\/(\w+)/)).output.1
        let source = try String(
            contentsOf: Self.root.appendingPathComponent("Examples/Embedding/Sources/\(example)/main.swift"),
            encoding: .utf8
        )
        let sourceLines = Self.codeLines(source)
        let blocks = text.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "```").first ?? "" }
        #expect(!blocks.isEmpty)
        for block in blocks {
            let lines = Self.codeLines(block)
            let found = sourceLines.indices.contains { start in
                start + lines.count <= sourceLines.count && Array(sourceLines[start..<start + lines.count]) == lines
            }
            #expect(found, "not in \(example): \(lines.first ?? "")")
        }
    }

    /// Non-empty lines without their indentation.
    static func codeLines(_ text: String) -> [String] {
        text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
}
