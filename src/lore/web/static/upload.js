// Drag and drop (or choose) several files; each is sent on its own so that it has its own
// progress bar and its own error, and one bad file never fails the others.
import { uploadFile } from "./api.js";
import { $, docHref, h } from "./dom.js";

async function uploadOne(file, onDone) {
  const bar = h("progress", { max: "1", value: "0", "aria-label": `Uploading ${file.name}` });
  const status = h("span", { class: "status" }, "uploading…");
  const row = h("li", { class: "upload-row" }, h("span", { class: "filename" }, file.name), bar, status);
  $("upload-list").prepend(row);
  try {
    const body = await uploadFile(file, (fraction) => (bar.value = fraction));
    bar.value = 1;
    const failed = (body.errors || []).find((error) => error.filename === file.name) || (body.errors || [])[0];
    const added = (body.documents || [])[0];
    if (failed || !added) {
      row.classList.add("failed");
      status.replaceChildren(failed ? failed.detail : "the server added no document");
    } else {
      row.classList.add("done");
      status.replaceChildren("added: ", h("a", { href: docHref(added.uri) }, added.title || added.filename));
      onDone();
    }
  } catch (error) {
    row.classList.add("failed");
    status.replaceChildren(error.message);
  }
}

export function wireUpload(refreshTree) {
  const zone = $("dropzone");
  const input = $("upload-input");
  const send = async (files) => {
    let added = 0;
    await Promise.all([...files].map((file) => uploadOne(file, () => (added += 1))));
    if (added) await refreshTree();
  };
  input.addEventListener("change", () => {
    send(input.files).finally(() => (input.value = ""));
  });
  for (const name of ["dragenter", "dragover"]) {
    zone.addEventListener(name, (event) => {
      event.preventDefault();
      zone.classList.add("dragging");
    });
  }
  for (const name of ["dragleave", "dragend"]) zone.addEventListener(name, () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("dragging");
    if (event.dataTransfer && event.dataTransfer.files.length) send(event.dataTransfer.files);
  });
}
