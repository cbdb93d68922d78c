public import Configuration
import Foundation

/// A secret read from a file (a mounted Kubernetes Secret, a Docker secret) instead of an
/// environment variable: the `*_FILE` keys. The file's content is the value, without the final
/// newline editors and `echo` add.
public enum SecretFile {
    /// The content of `path`; `key`, the key that named the file, is named in the error when it
    /// cannot be read.
    public static func read(_ path: String, for key: ConfigKey) throws(ConfigurationValueError) -> String {
        guard let data = FileManager.default.contents(atPath: path), var text = String(data: data, encoding: .utf8) else {
            throw ConfigurationValueError("\(key.environmentName): cannot read \(path)")
        }
        while text.last?.isNewline == true { text.removeLast() }
        guard !text.isEmpty else { throw ConfigurationValueError("\(key.environmentName): \(path) is empty") }
        return text
    }
}
