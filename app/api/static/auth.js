// The API key or access token (a JWT of the server's identity provider; the server tells
// them apart): asked for once, kept in sessionStorage (this tab only), never put in a URL.

const STORAGE = "finishline.apiKey";

let pending = null; // one dialog at a time; every caller waiting for a key shares it
let memoryKey = null; // when sessionStorage is unavailable

function storedKey() {
  try {
    return sessionStorage.getItem(STORAGE);
  } catch {
    return null;
  }
}

function setKey(key) {
  try {
    sessionStorage.setItem(STORAGE, key);
  } catch {
    // storage off (private mode): the key lives as long as the page
  }
  memoryKey = key;
}

export function currentKey() {
  return storedKey() ?? memoryKey;
}

/**
 * Show the key dialog; resolves with the key entered, or null if the person cancelled.
 * `message` says why we ask (first time, or the key was refused).
 */
export function askForKey(message) {
  if (pending) return pending;
  const dialog = document.getElementById("key-dialog");
  const form = dialog.querySelector("form");
  const input = dialog.querySelector("#key-input");
  dialog.querySelector("#key-message").textContent = message;
  input.value = "";
  pending = new Promise((resolve) => {
    const done = (key) => {
      form.removeEventListener("submit", onSubmit);
      dialog.removeEventListener("close", onClose);
      pending = null;
      resolve(key);
    };
    const onSubmit = (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) {
        input.focus();
        return;
      }
      setKey(key);
      dialog.close("ok");
      done(key);
    };
    const onClose = () => done(dialog.returnValue === "ok" ? currentKey() : null);
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("close", onClose);
    dialog.querySelector("#key-cancel").onclick = () => dialog.close("cancel");
  });
  dialog.returnValue = "";
  dialog.showModal();
  input.focus();
  return pending;
}
