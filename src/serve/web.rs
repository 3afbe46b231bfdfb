//! The web page for a running pipeline (`GET /` on the metrics address):
//! one HTML file and one script, plain JavaScript with no dependencies,
//! embedded in the binary so that nothing is built or fetched at run time.
//! The script reads `/api/v1/status`, the document `weir status --json`
//! prints, every second: the page counts nothing of its own.

const INDEX: &str = include_str!("web/index.html");
const SCRIPT: &str = include_str!("web/app.js");

/// The page's file at `path`: its content type and text.
pub fn file(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" | "/index.html" => Some(("text/html; charset=utf-8", INDEX)),
        "/app.js" => Some(("text/javascript; charset=utf-8", SCRIPT)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_its_script_from_this_server_only() {
        let (kind, html) = file("/").unwrap();
        assert!(kind.starts_with("text/html"));
        assert!(html.contains(r#"<script src="app.js"></script>"#));
        assert!(!html.contains("http://") && !html.contains("https://"), "no CDN");
        let (_, script) = file("/app.js").unwrap();
        assert!(script.contains(r#"fetch("api/v1/status""#), "reads the status document");
        assert!(!script.contains("innerHTML"), "text goes in as text, never as markup");
        assert_eq!(file("/other"), None);
    }
}
