// libyaml itself, as Yams builds it: Yams' Parser composes a whole document and does not hand
// out the events or tokens it reads.
import CYaml

extension PipelineFileReader {
    static let anchorsAndAliasesRefused =
        "YAML anchors and aliases (&name, *name) are not taken in a pipeline file; write the value out where it is used"

    /// The most `[` and `{` a pipeline file may have open at once: far more than any setting
    /// needs. libyaml's scanner walks every open one for each token it reads, so a megabyte of
    /// `[` took it tens of minutes before its parser's own limit (1,000) was ever met.
    static let maxFlowDepth = 64

    static var nestedTooDeep: String {
        "the pipeline file nests [ ] and { } more than \(maxFlowDepth) deep; no setting needs a tenth of that"
    }

    /// Where the file's first anchor (`&name`) or alias (`*name`) is written, or its `[` or `{`
    /// past `maxFlowDepth`, with why it is refused; nil when it has none, or when libyaml's
    /// scanner stops at a syntax error before one (`Yams.compose` then reports that error where
    /// it is).
    ///
    /// Looked for before composing, because composing is where an alias costs: aliases share
    /// their anchor's node, and Yams hashes a mapping's keys to find duplicates, recursing
    /// through every shared subtree, so a 400-byte file of nested aliases (a "billion laughs")
    /// takes exponential time, and any reader walking the tree after it would too. A pipeline
    /// file has no use for them. The scanner's tokens, not a search of the text: an `&` or `*`
    /// inside a quoted or plain value (`password: "a&b*c"`) is no anchor.
    func firstRefusedToken() -> (position: PipelinePosition, why: String)? {
        var text = yaml
        guard !text.isEmpty else { return nil }
        return text.withUTF8 { bytes -> (position: PipelinePosition, why: String)? in
            var parser = yaml_parser_t()
            guard yaml_parser_initialize(&parser) == 1 else { return nil }
            defer { yaml_parser_delete(&parser) }
            yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING)
            yaml_parser_set_input_string(&parser, bytes.baseAddress, bytes.count)
            var token = yaml_token_t()
            var depth = 0
            // > The initial token has the type YAML_STREAM_START_TOKEN while the ending token
            // > has the type YAML_STREAM_END_TOKEN. An application is responsible for freeing
            // > any buffers associated with the produced token object using the
            // > yaml_token_delete function.  (yaml.h, yaml_parser_scan)
            while yaml_parser_scan(&parser, &token) == 1 {
                defer { yaml_token_delete(&token) }
                // libyaml's marks count from 0, as Yams' `Mark` does not.
                let position = PipelinePosition(line: Int(token.start_mark.line) + 1, column: Int(token.start_mark.column) + 1)
                switch token.type {
                case YAML_ANCHOR_TOKEN, YAML_ALIAS_TOKEN:
                    return (position, Self.anchorsAndAliasesRefused)
                case YAML_FLOW_SEQUENCE_START_TOKEN, YAML_FLOW_MAPPING_START_TOKEN:
                    depth += 1
                    if depth > Self.maxFlowDepth { return (position, Self.nestedTooDeep) }
                case YAML_FLOW_SEQUENCE_END_TOKEN, YAML_FLOW_MAPPING_END_TOKEN:
                    // As libyaml counts: a `]` with none open closes nothing (counted below
                    // zero, a run of them let as many `[` through unrefused).
                    depth = max(0, depth - 1)
                case YAML_STREAM_END_TOKEN:
                    return nil
                default:
                    continue
                }
            }
            return nil
        }
    }
}
