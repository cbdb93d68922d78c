import Foundation

/// A secret read from a file (a mounted Kubernetes Secret, a Docker secret) instead of an
/// environment variable: the `*_FILE` keys. The file's content is the value, without the final
/// newline editors and `echo` add.
enum SecretFile {
    /// The content of `path`; `key` names the setting in the error when it cannot be read.
    static func read(_ path: String, for key: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path), var text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError("\(key): cannot read \(path)")
        }
        while text.last?.isNewline == true { text.removeLast() }
        guard !text.isEmpty else { throw ConfigurationError("\(key): \(path) is empty") }
        return text
    }
}
